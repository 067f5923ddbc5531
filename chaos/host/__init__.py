"""The host side of the controller: running commands (proc), acting inside network namespaces (netns), the
ledger of everything applied (ledger), the controller's history file (history) and the crash-safe heal (heal)."""
