"""A fake of the leader's Swarm configs as docker-py's APIClient reaches them: names
unique (409), data kept (base64 in the spec, as docker-py sends it and the engine
returns it), labels updated only at the version read (a stale version is
refused as Swarm's Raft store refuses it), a missing id 404."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any


class ApiError(Exception):
    """What the Docker SDK raises: an error with the HTTP status."""

    def __init__(self, status_code: int, text: str = "") -> None:
        super().__init__(text or f"HTTP {status_code}")
        self.status_code = status_code


class Response:
    def __init__(self, status_code: int, text: str = "") -> None:
        self.status_code, self.text = status_code, text


class FakeConfigs:
    """The configs API; `interfere` (if set) runs once before the next update, as
    another writer changing the entry between a read and a write."""

    def __init__(self) -> None:
        self.by_id: dict[str, dict[str, Any]] = {}
        self.made = 0
        self.interfere: Any = None
        self.updates = 0

    def create_config(
        self, name: str, data: bytes, labels: dict[str, str] | None = None
    ) -> dict[str, str]:
        if any(c["Spec"]["Name"] == name for c in self.by_id.values()):
            raise ApiError(409, f"config {name} already exists")
        self.made += 1
        cid = f"cfg{self.made}"
        spec = {"Name": name, "Labels": dict(labels or {}), "Data": base64.b64encode(data).decode()}
        self.by_id[cid] = {"ID": cid, "Version": {"Index": 1}, "Spec": spec}
        return {"ID": cid}

    def configs(self, filters: dict[str, str]) -> list[dict[str, Any]]:
        prefix = filters.get("name", "")
        return [
            copy.deepcopy(c) for c in self.by_id.values() if c["Spec"]["Name"].startswith(prefix)
        ]

    def inspect_config(self, cid: str) -> dict[str, Any]:
        if cid not in self.by_id:
            raise ApiError(404, f"config {cid} not found")
        return copy.deepcopy(self.by_id[cid])

    def remove_config(self, cid: str) -> None:
        if self.by_id.pop(cid, None) is None:
            raise ApiError(404, f"config {cid} not found")

    # The low-level calls queue.py's update makes (docker-py has no update_config).
    def _url(self, path: str, *args: str) -> str:
        return path.format(*args)

    def _post_json(self, url: str, data: dict[str, Any], params: dict[str, Any]) -> Response:
        if self.interfere is not None:
            fn, self.interfere = self.interfere, None
            fn(self)
        cid = url.split("/")[2]
        cfg = self.by_id.get(cid)
        if cfg is None:
            return Response(404, f"config {cid} not found")
        if int(params["version"]) != cfg["Version"]["Index"]:
            return Response(500, "rpc error: code = Unknown desc = update out of sequence")
        if data.get("Data", cfg["Spec"]["Data"]) != cfg["Spec"]["Data"]:
            return Response(400, "only updates to Labels are allowed")
        cfg["Spec"] = {**cfg["Spec"], "Labels": dict(data.get("Labels") or {})}
        cfg["Version"]["Index"] += 1
        self.updates += 1
        return Response(200)

    def _raise_for_status(self, res: Response) -> None:
        if res.status_code >= 400:
            raise ApiError(res.status_code, res.text)

    def data(self, name: str) -> Any:
        (cfg,) = [c for c in self.by_id.values() if c["Spec"]["Name"] == name]
        return json.loads(base64.b64decode(cfg["Spec"]["Data"]))

    def labels(self, name: str) -> dict[str, str]:
        (cfg,) = [c for c in self.by_id.values() if c["Spec"]["Name"] == name]
        return dict(cfg["Spec"]["Labels"])


class Client:
    """What hostops.docker_client returns: the low-level API on `.api`."""

    def __init__(self, api: FakeConfigs) -> None:
        self.api = api
