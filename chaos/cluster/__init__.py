"""Clusters on Docker: names, the compose file, images without a registry, lifecycle (up, down, ps), the node
control-API client, and `splitlab doctor`."""
