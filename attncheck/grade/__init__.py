"""``attncheck grade``: grade a class of attention submissions (or one candidate) safely and fast.

The checks are attncheck's own (``attncheck.pipeline``'s static pass, ``attncheck.dynamic``'s
runner); this package adds what a grader needs around them: finding each student's entry and
staging it privately (``submissions``), the assignment and its rubric (``assignment``,
``rubric``), a warm worker that forks one jailed child per submission (``forkchild``,
``worker``), a gradebook that survives interruptions (``gradebook``), and what people read
(``feedback``, ``gradescope``, ``csv_export``, ``html_report``).
"""
