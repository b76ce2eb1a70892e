"""``attncheck grade``: grade a class of attention submissions (or one candidate) safely and fast.

The checks are attncheck's own (``attncheck.pipeline``'s static pass, ``attncheck.dynamic``'s
runner); this package adds what a grader needs around them: finding each student's entry and
staging it privately (``submissions``), the assignment and its rubric (``assignment``,
``rubric``), a warm worker whose zygote forks one jailed child per submission (``worker``; the
jail is ``attncheck.dynamic.harness.forked``), a gradebook that survives interruptions
(``gradebook``), the scheduling over workers or Dask (``schedule``), and what people read
(``feedback``, ``gradescope``, ``csv_export``, ``html_report``).
"""
