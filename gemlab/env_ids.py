"""The env ids that gemlab's presets, studies and tiny models name: GEM's own GuessTheNumber levels, and the variants
that ``gemlab.env_variants`` registers with GEM (its docstring says what each one is). Names only, with
no GEM import, so that ``config`` and the studies can name an env without loading one."""

GUESS_EASY = "game:GuessTheNumber-v0-easy"  # GEM's: 1-10 in 4 turns; the default of Config and GEM's example
GUESS_HARD = "game:GuessTheNumber-v0-hard"  # GEM's: 1-50 in 7 turns
GUESS_RANDOM = "game:GuessTheNumber-v0-random"  # GEM's: a range and turns drawn per game
GUESS_20 = "game:GuessTheNumber-v0-1to20"
GUESS_20_IN_7 = "game:GuessTheNumber-v0-1to20-7turns"
GUESS_EASY_WINS = f"{GUESS_EASY}-wins"
PRODUCTS_1DIGIT = "rg:products-1digit"
SUMS_1DIGIT = "rg:sums-1digit"
SUMS_TRAIN, SUMS_TEST = f"{SUMS_1DIGIT}-train", f"{SUMS_1DIGIT}-test"
SUMS_TO20_TRAIN = "rg:sums-to20-train"
SUMS_MIX_TRAIN = "rg:sums-mix-train"
DIFFS_1DIGIT = "rg:diffs-1digit"
DIFFS_TRAIN, DIFFS_TEST = f"{DIFFS_1DIGIT}-train", f"{DIFFS_1DIGIT}-test"
TIMES_1DIGIT = "rg:times-1digit"
TIMES_TRAIN, TIMES_TEST = f"{TIMES_1DIGIT}-train", f"{TIMES_1DIGIT}-test"
PRODUCTS_3X2 = "math:products-3x2"  # a three-digit times a two-digit number, for GEM's python tool
PRODUCTS_TRAIN, PRODUCTS_TEST = f"{PRODUCTS_3X2}-train", f"{PRODUCTS_3X2}-test"
# the same problems asked for the number alone: the tool study's arm without the tool
PRODUCTS_NO_TOOL_TRAIN, PRODUCTS_NO_TOOL_TEST = f"{PRODUCTS_3X2}-notool-train", f"{PRODUCTS_3X2}-notool-test"
OFFLINE_MATH = "math:GSMSymbolic"  # GEM's math env on word problems made offline (gemlab/offline_math.py)
