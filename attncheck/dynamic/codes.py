"""The dynamic pass's own catalogue codes (ATT901-ATT909), named once for every module that reports one.

Their severity and summary stay in ``attncheck.catalogue``; a test checks each name here against
the catalogue's name for its code.
"""

FORWARD_CRASH = "ATT901"
OUTPUT_SHAPE = "ATT902"
REFERENCE_MISMATCH = "ATT903"
BATCH_LEAK = "ATT904"
QUERY_LEAK = "ATT905"
FUTURE_LEAK = "ATT906"
UNUSED_PARAMETER = "ATT907"
EVAL_NONDETERMINISM = "ATT908"
LOW_PRECISION = "ATT909"
