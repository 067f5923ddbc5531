"""splitlab's controller: cluster lifecycle, images, faults, and the `splitlab` command."""
