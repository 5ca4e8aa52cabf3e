"""The machinery of a controller, usable on its own: the work queue, its rate limiters, the
reconcile contract (results and error classes), the pool of workers, and the gate that holds
keys while the API server does not answer.

It imports the client and the leaves; never the operator, the cli or the domain.
"""
