"""The Kubernetes Leases: the pool's restart budget, and each pod's restart-loop brake memory."""
