"""The pod's addresses as the diagnosis reads them (children/observe.pod_ips): a pod's
status is untrusted input."""
from hypothesis import given
from hypothesis import strategies as st

from disttrain.children import observe


def test_pod_ips_prefer_the_list_and_keep_only_addresses():
    assert observe.pod_ips({"status": {"podIP": "10.0.0.1", "podIPs": [{"ip": "10.0.0.1"}, {"ip": "fd00::1"}]}}) \
        == ("10.0.0.1", "fd00::1")
    assert observe.pod_ips({"status": {"podIP": "10.0.0.2"}}) == ("10.0.0.2",)
    assert observe.pod_ips({"status": {"podIPs": [{"ip": "node-a"}, {"ip": 7}, "x", {"ip": "10.0.0.3"}]}}) == ("10.0.0.3",)
    assert observe.pod_ips({"status": {"podIP": "not an ip"}}) == ()
    assert observe.pod_ips(None) == () and observe.pod_ips({"status": []}) == ()


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=12),
                    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c, max_size=4),
                    max_leaves=12)


@given(st.dictionaries(st.sampled_from(["podIP", "podIPs", "x"]), JSON | st.lists(
    st.fixed_dictionaries({"ip": st.one_of(st.ip_addresses().map(str), st.text(max_size=8))}), max_size=9)))
def test_any_status_gives_at_most_four_valid_addresses(status):
    ips = observe.pod_ips({"status": status})
    assert len(ips) <= 4 and len(set(ips)) == len(ips)
    assert all(observe._is_ip(ip) for ip in ips)
