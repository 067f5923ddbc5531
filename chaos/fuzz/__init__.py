"""`splitlab fuzz`: seeded datagram generation (gen), sending and judging (run), records and replay (record),
delta-debugging the culprits (shrink), and the command (command)."""
