"""Live metrics of a running run: the controller's fault matrix as Prometheus metrics (faultmatrix), the nodes'
`/metrics` scraped and parsed (nodes), and `splitlab top`, both in the terminal (top)."""
