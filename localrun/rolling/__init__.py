"""`make rolling` (``python -m localrun.rolling``): a rolling deployment rehearsed on this machine
(rolling.py), the previous release's hosts beside this one's (hosts.py), the traffic, the store
it reads and the verdict."""
