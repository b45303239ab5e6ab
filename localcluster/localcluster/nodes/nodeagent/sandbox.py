"""The pod's sandbox as a CNI plugin and kubelet make it: network namespace and pod IP,
hostname, the managed /etc/hosts and /etc/resolv.conf."""
from __future__ import annotations

from localcluster.common.config import CLUSTER_DOMAIN
from localcluster.network import nodedns, podnet
from localcluster.nodes.nodeagent.podstate import PodState
from localcluster.nodes.nodeagent.shared import log


class PodSandbox(PodState):
    """Network sandbox and name resolution files of a pod worker."""

    def _setup_sandbox(self) -> bool:
        """Pod network (as a CNI plugin would): own namespace, eth0 on cni0, a pod IP from
        the node's pod CIDR, safe sysctls. Returns False (pod stays Pending, or Failed
        with SysctlForbidden as kubelet rejects it) when it could not."""
        agent = self.agent
        spec = self.pod["spec"]
        try:
            sysctls = podnet.check_sysctls((spec.get("securityContext") or {}).get("sysctls"),
                                           self.host_network)
        except podnet.SysctlForbidden as e:
            self.pod_reason, self.pod_message = "SysctlForbidden", f"Pod {e}"
            self.event("SysctlForbidden", str(e), etype="Warning")
            self.terminal = True
            return False
        ip_file = self.dir / "pod-ip"
        with agent.net_lock:
            if ip_file.exists():  # a previous agent's sandbox for this pod: start afresh,
                old = ip_file.read_text().strip()  # unless the address went to a live pod
                with agent.lock:
                    live = {w.pod_ip for w in agent.workers.values() if w is not self}
                if old not in live:
                    podnet.teardown_pod(agent.node.netns, old)
                ip_file.unlink()
            try:
                ip = podnet.allocate(agent.node.netns, agent.pod_cidr)
                self.netns = podnet.setup_pod(agent.node.netns, agent.pod_cidr, ip, sysctls)
            except Exception as e:
                ip, msg = None, f"Failed to create pod sandbox: {e}"
            else:
                ip_file.write_text(ip)
                self.pod_ip = ip
                self.netns_ino = podnet.netns_inode(agent.node.netns, ip)
        if ip is None:
            log.warning("pod %s/%s: %s", self.ns, self.pod_name, msg)
            self.event("FailedCreatePodSandBox", msg, etype="Warning")
            for c in self.inits + self.mains:
                c.state = {"waiting": {"reason": "ContainerCreating", "message": msg[:500]}}
            self.wake.wait(2.0)
            return False
        return True

    def _hostname(self) -> str:
        """The container's hostname: the node's with hostNetwork, else spec.hostname or
        the pod's name (as kubelet sets it)."""
        if self.host_network:
            return self.agent.node.name
        return self.pod["spec"].get("hostname") or self.pod_name

    def _hosts_file(self) -> str:
        """/etc/hosts: the node's with hostNetwork; else kubelet's managed file (localhost,
        the pod's own address and FQDN, hostAliases)."""
        spec = self.pod["spec"]
        lines = []
        if self.host_network:
            base = self.agent.hosts_file.read_text()
        else:
            name = self._hostname()
            names = [name]
            if spec.get("subdomain"):
                names.insert(0, f"{name}.{spec['subdomain']}.{self.ns}.svc.{CLUSTER_DOMAIN}")
            base = ("# Kubernetes-managed hosts file.\n127.0.0.1\tlocalhost\n"
                    "::1\tlocalhost ip6-localhost ip6-loopback\n"
                    f"{self.pod_ip}\t{chr(9).join(names)}\n")
        for alias in spec.get("hostAliases") or []:
            lines.append(f"{alias.get('ip')}\t{chr(9).join(alias.get('hostnames') or [])}")
        if lines:
            base += "\n# Entries added by HostAliases.\n" + "".join(f"{ln}\n" for ln in lines)
        path = self.dir / "etc-hosts"
        path.write_text(base)
        return str(path)

    def _resolv_conf(self) -> str | None:
        """/etc/resolv.conf by dnsPolicy: ClusterFirst (pod network) and
        ClusterFirstWithHostNet point at cluster DNS with kubelet's search path; None and
        dnsConfig as the pod says; otherwise (Default, or ClusterFirst with hostNetwork)
        None: the node's own file."""
        spec = self.pod["spec"]
        policy = spec.get("dnsPolicy") or "ClusterFirst"
        cluster = policy == "ClusterFirstWithHostNet" or (
            policy == "ClusterFirst" and not self.host_network)
        cfg = spec.get("dnsConfig") or {}
        if not cluster and policy != "None" and not cfg:
            return None
        servers, search, options = [], [], ["ndots:5"] if cluster else []
        if cluster:
            servers = [nodedns.server_for(self.agent.topology.dns_records)]
            search = [f"{self.ns}.svc.{CLUSTER_DOMAIN}", f"svc.{CLUSTER_DOMAIN}", CLUSTER_DOMAIN]
        servers += cfg.get("nameservers") or []
        search += cfg.get("searches") or []
        for o in cfg.get("options") or []:
            options = [x for x in options if x.split(":")[0] != o.get("name")]
            options.append(o["name"] + (f":{o['value']}" if o.get("value") else ""))
        text = "".join(f"nameserver {x}\n" for x in servers)
        if search:
            text += "search " + " ".join(search) + "\n"
        if options:
            text += "options " + " ".join(options) + "\n"
        path = self.dir / "resolv.conf"
        path.write_text(text)
        return str(path)
