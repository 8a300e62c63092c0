"""Store semantics without HTTP: versions, no-op writes, history window, cascades."""

from __future__ import annotations

import pytest

from drainsafe.lab.apiserver import admission
from drainsafe.lab.apiserver import status as st
from drainsafe.lab.apiserver.discovery import BY_KEY
from drainsafe.lab.apiserver.store import Event, Store

PODS = BY_KEY["pods"]
CONFIGMAPS = BY_KEY["configmaps"]
NAMESPACES = BY_KEY["namespaces"]


@pytest.fixture
def store() -> Store:
    s = Store(history=3)
    admission.install(s)
    s.create(NAMESPACES, {"metadata": {"name": "default"}})
    return s


def test_versions_increase_and_no_op_updates_write_nothing(store: Store) -> None:
    seen: list[Event] = []
    store.listen(seen.append)
    a = store.create(CONFIGMAPS, {"metadata": {"name": "a", "namespace": "default"},
                                  "data": {"k": "1"}})
    same = store.update(CONFIGMAPS, a)
    assert same["metadata"]["resourceVersion"] == a["metadata"]["resourceVersion"]
    a["data"] = {"k": "2"}
    changed = store.update(CONFIGMAPS, a)
    assert int(changed["metadata"]["resourceVersion"]) > int(a["metadata"]["resourceVersion"])
    assert [e.type for e in seen] == ["ADDED", "MODIFIED"]
    assert [e.rv for e in seen] == sorted({e.rv for e in seen})
    # the stale copy now conflicts
    a["data"] = {"k": "3"}
    with pytest.raises(st.StatusError) as err:
        store.update(CONFIGMAPS, a)
    assert err.value.code == 409


def test_history_window_expires_old_versions(store: Store) -> None:
    first = store.create(CONFIGMAPS, {"metadata": {"name": "a", "namespace": "default"}})
    for i in range(5):
        store.create(CONFIGMAPS, {"metadata": {"name": f"b{i}", "namespace": "default"}})
    with pytest.raises(st.StatusError) as err:
        store.watch(CONFIGMAPS, int(first["metadata"]["resourceVersion"]))
    assert err.value.code == 410 and err.value.reason == "Expired"
    w = store.watch(CONFIGMAPS, store.oldest_watchable(CONFIGMAPS))
    assert w.queue.qsize() == 3


def test_names_namespaces_and_generate_name_are_validated(store: Store) -> None:
    with pytest.raises(st.StatusError) as err:
        store.create(CONFIGMAPS, {"metadata": {"name": "Bad_Name", "namespace": "default"}})
    assert err.value.code == 422
    with pytest.raises(st.StatusError) as err:
        store.create(CONFIGMAPS, {"metadata": {"namespace": "default"}})
    assert err.value.code == 422
    made = store.create(CONFIGMAPS, {"metadata": {"generateName": "x-", "namespace": "default"}})
    assert made["metadata"]["name"].startswith("x-") and len(made["metadata"]["name"]) == 7


def test_deleting_a_namespace_removes_its_objects(store: Store) -> None:
    store.create(NAMESPACES, {"metadata": {"name": "team"}})
    store.create(CONFIGMAPS, {"metadata": {"name": "a", "namespace": "team"}})
    store.create(PODS, {"metadata": {"name": "p", "namespace": "team"},
                        "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}})
    store.delete(NAMESPACES, "", "team")
    assert store.peek(CONFIGMAPS, "team", "a") is None
    assert store.peek(PODS, "team", "p") is None
    assert store.peek(NAMESPACES, "", "team") is None


def test_pod_status_writes_keep_spec_and_main_writes_keep_status(store: Store) -> None:
    store.create(PODS, {"metadata": {"name": "p", "namespace": "default"},
                        "spec": {"containers": [{"name": "c", "image": "x:1"}]}})
    pod = store.get(PODS, "default", "p")
    pod["status"]["phase"] = "Running"
    pod["spec"]["containers"][0]["image"] = "hacked"
    after = store.update(PODS, pod, subresource="status")
    assert after["status"]["phase"] == "Running"
    assert after["spec"]["containers"][0]["image"] == "x:1"
    after["status"]["phase"] = "Failed"
    after["metadata"]["labels"] = {"a": "b"}
    again = store.update(PODS, after)
    assert again["status"]["phase"] == "Running" and again["metadata"]["labels"] == {"a": "b"}


def test_finalizers_hold_a_deletion_and_the_last_removal_completes_it(store: Store) -> None:
    seen: list[Event] = []
    store.listen(seen.append)
    store.create(CONFIGMAPS, {"metadata": {"name": "f", "namespace": "default",
                                           "finalizers": ["a/b", "c/d"]}})
    marked = store.delete(CONFIGMAPS, "default", "f")
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 0
    assert "generation" not in marked["metadata"]  # not tracked for a ConfigMap
    assert store.delete(CONFIGMAPS, "default", "f") == marked  # a second delete: no change
    one = store.get(CONFIGMAPS, "default", "f")
    one["metadata"]["finalizers"] = ["c/d"]
    store.update(CONFIGMAPS, one)
    assert store.peek(CONFIGMAPS, "default", "f") is not None
    last = store.get(CONFIGMAPS, "default", "f")
    last["metadata"]["finalizers"] = []
    store.update(CONFIGMAPS, last)
    assert store.peek(CONFIGMAPS, "default", "f") is None
    assert [e.type for e in seen] == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]


def _pod(name: str, node: str | None) -> dict[str, object]:
    spec: dict[str, object] = {"containers": [{"name": "c", "image": "i"}]}
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "namespace": "default"}, "spec": spec}


def test_a_negative_grace_is_one_second_for_a_running_pod_and_at_once_for_an_unscheduled_one(
        store: Store) -> None:
    store.create(PODS, _pod("scheduled", "n1"))
    marked = store.delete(PODS, "default", "scheduled", grace_period=-5)
    assert marked["metadata"]["deletionGracePeriodSeconds"] == 1
    assert store.peek(PODS, "default", "scheduled") is not None  # its kubelet removes it
    store.create(PODS, _pod("pending", None))
    store.delete(PODS, "default", "pending", grace_period=-5)
    assert store.peek(PODS, "default", "pending") is None
