"""splitlab's protocol node: sans-IO protocol state machines, their runtimes, the control API and the history."""
