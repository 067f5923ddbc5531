"""The node contract (NODE_CONTRACT.md) checked against an image: `splitlab node check`."""
