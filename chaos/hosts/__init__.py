"""Many hosts: the inventory, SSH to each host through fabric, images shipped without a registry, the data
network across hosts (bridge + VXLAN), and the test bed of host containers."""
