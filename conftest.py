"""Repository-wide pytest setup.

Notebook kernels started by ``pytest --nbmake notebooks/`` inherit this process's environment, so
setting ``GEMLAB_QUICK=1`` here makes every notebook use its small sizes under test. Set it to
anything else (``GEMLAB_QUICK=0 pytest --nbmake notebooks/``) to execute them at full size.
"""

import os

os.environ.setdefault("GEMLAB_QUICK", "1")
