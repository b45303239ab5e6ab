"""nftables firewalls for simulated nodes: an input filter in table ``inet disttrain``,
and the same rules in a forward chain for traffic headed into the node's pod bridge
(``cni0``, see podnet.py), so pods behind the node meet the node's firewall as they do
behind a host firewall or a CNI's host endpoint policy; likewise an optional output filter
(an egress rule) with its twin for traffic coming out of the pod bridge.

:func:`render` (pure) turns a scenario's firewall (``{policy, input: [rules]}``, see
``scenario.FirewallRule``) into an ``nft -f`` script; :func:`apply` loads it inside a
node's namespace (replacing an earlier one); :func:`clear` removes it.
"""
from __future__ import annotations

import subprocess
from typing import Optional

TABLE = "disttrain"
POD_BRIDGE = "cni0"  # podnet.BRIDGE (not imported: this module stays free of `ip` calls)


class FirewallError(RuntimeError):
    """nft refused the rules."""


def render_rule(rule: dict) -> str:
    """One rule as nft syntax, e.g. ``tcp dport 29500 ct state new drop``."""
    parts = []
    if rule.get("iifname"):
        parts.append(f'iifname "{rule["iifname"]}"')
    if rule.get("oifname"):
        parts.append(f'oifname "{rule["oifname"]}"')
    for key in ("saddr", "daddr"):
        if rule.get(key):
            fam = "ip6" if ":" in rule[key] else "ip"
            parts.append(f"{fam} {key} {rule[key]}")
    if rule.get("proto"):
        if rule.get("dport") is not None:
            parts.append(f"{rule['proto']} dport {rule['dport']}")
        else:
            parts.append(f"meta l4proto {rule['proto']}")
    if rule.get("state"):
        parts.append("ct state " + ",".join(rule["state"]))
    action = rule["action"]
    if action == "reject" and rule.get("proto") == "tcp":
        action = "reject with tcp reset"  # what a closed port answers: ECONNREFUSED
    parts.append(action)
    return " ".join(parts)


def render(fw: Optional[dict]) -> str:
    """The nft script for a firewall dict (None: only the flush of an earlier table)."""
    lines = [f"table inet {TABLE}", f"delete table inet {TABLE}"]
    if fw:
        lines += [f"table inet {TABLE} {{",
                  "  chain input {",
                  f"    type filter hook input priority 0; policy {fw.get('policy', 'accept')};"]
        lines += [f"    {render_rule(r)}" for r in fw.get("input") or []]
        lines += ["  }",
                  "  chain forward {",
                  "    type filter hook forward priority 0; policy accept;",
                  f'    oifname != "{POD_BRIDGE}" accept']
        lines += [f"    {render_rule(r)}" for r in fw.get("input") or []]
        if fw.get("policy", "accept") != "accept":
            lines.append(f"    {fw['policy']}")
        lines += ["  }"]
        if fw.get("output"):  # what the node sends, and its pods through the pod bridge
            lines += ["  chain output {", "    type filter hook output priority 0; policy accept;"]
            lines += [f"    {render_rule(r)}" for r in fw["output"]]
            lines += ["  }", "  chain forward_out {", "    type filter hook forward priority 1; policy accept;",
                      f'    iifname != "{POD_BRIDGE}" accept']
            lines += [f"    {render_rule(r)}" for r in fw["output"]]
            lines += ["  }"]
        lines += ["}"]
    return "\n".join(lines) + "\n"


def apply(netns: str, fw: Optional[dict]) -> None:
    """Load ``fw`` into ``netns`` atomically (an earlier disttrain table is replaced).
    Raises FirewallError with nft's complaint."""
    p = subprocess.run(["ip", "netns", "exec", netns, "nft", "-f", "-"], input=render(fw),
                       capture_output=True, text=True)
    if p.returncode != 0:
        raise FirewallError(f"nft in {netns}: {p.stderr.strip()}")


def check(fw: Optional[dict]) -> None:
    """Ask nft whether the script is valid without loading it (``nft -c``).
    Raises FirewallError with nft's complaint."""
    p = subprocess.run(["nft", "-c", "-f", "-"], input=render(fw), capture_output=True, text=True)
    if p.returncode != 0:
        raise FirewallError(f"nft: {p.stderr.strip()}")


def clear(netns: str) -> None:
    """Remove our table from ``netns`` (no error if absent)."""
    apply(netns, None)


__all__ = ["FirewallError", "render", "render_rule", "apply", "check", "clear", "TABLE"]
