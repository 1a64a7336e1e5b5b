"""The pool's restart budget: pure slot rules and the Kubernetes Leases that hold them."""
