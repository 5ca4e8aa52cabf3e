"""The command line: one module per command, and the flags that become Settings.

The top of the stack: it may import every package below it (operator, controller, client,
replication and the leaves); nothing imports it.
"""
