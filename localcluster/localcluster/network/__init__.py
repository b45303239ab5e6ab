"""The simulated network: node namespaces and the fabric, pod networking, routed links,
firewalls, cluster DNS and node-local DNS, the `kubernetes` Service relay, and the node
topology a scenario yields. Imports only ``common``."""
