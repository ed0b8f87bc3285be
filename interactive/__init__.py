"""Interactive work in running jobs: the authenticated proxy to a replica's port (one origin
per route), port-forward and exec from paddlectl and the job page, and session jobs
(notebooks, VisualDL). It sits above jobs, scheduling and accounts, beside experiments."""
