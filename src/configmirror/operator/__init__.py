"""The application: the manager that wires and runs every component, the replicator that
works one key, what the operator remembers, the caches' wiring, the published policy, the
settings and the probes/metrics server.

It imports the controller, the client, the domain and the leaves; never the cli.
"""
