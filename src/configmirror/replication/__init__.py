"""The domain, with no I/O: the annotation language, label selectors, what the caches hold,
the one decision for plan, status, wait and run, routing of changes to keys, status,
admission, adoption and migration from other tools.

It imports only the leaves: nothing of the client, the controller, the operator or the cli.
"""
