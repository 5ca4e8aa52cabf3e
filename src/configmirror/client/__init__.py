"""The wire: HTTP/1.1 over TLS, requests and watches to the API server, informers and their
stores, whether the server answers, Events, leader election and the client's rate limit.

It imports only the leaves.
"""
