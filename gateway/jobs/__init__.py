"""Speech jobs: long inputs spoken in the background, segment by segment, shared by replicas (``docs/jobs.md``).

- ``records``: what a job is while it lives in the store;
- ``store``: where jobs live (memory, or Redis), and the one rule that keeps a job whole: commit the next segment only;
- ``runner``: speaking one job through the speech service's one operation, one segment per turn;
- ``turns``: whose segment is spoken next (tenants in turn at a process's speaking slots);
- ``dispatch``: who speaks a job (SAQ's queue on the shared Redis, taken from fairly, or this process's tasks);
- ``content``: a job's audio as one file (ranges, following a job under way);
- ``followers``: following a job's progress (one poll per job per process, a cap per tenant);
- ``service``: the jobs as their routes use them.
"""
