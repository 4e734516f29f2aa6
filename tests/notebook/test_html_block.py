"""The HTML block every view returns, and blocks side by side."""

from gemlab.notebook.html_block import Html, side_by_side


def test_html_block_renders_in_jupyter():
    block = Html("<b>x</b>")
    assert block._repr_html_() == "<b>x</b>" and str(block + "<i>y</i>") == "<b>x</b><i>y</i>"


def test_side_by_side_puts_each_block_under_its_escaped_name():
    html = str(side_by_side({"a < b": Html("<b>left</b>"), "right": "<i>plain</i>"}, min_width=300))
    assert html.count("flex:1 1 300px") == 2
    assert "a &lt; b</div><b>left</b>" in html and "right</div><i>plain</i>" in html
