"""splitlab's node for the real JGroups 2.12 (Debian's `libjgroups-java`): the same node contract as splitlab's own
node (NODE_CONTRACT.md: environment, control API, history), with JGroups' own protocol stack inside a JVM that
JPype drives from this Python process. Java is used only where JGroups needs a subclass: the trace protocol in
`images/jgroups/java/` that shows this driver every message crossing the bottom of the stack."""
