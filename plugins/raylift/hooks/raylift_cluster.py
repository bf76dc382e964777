"""A cluster is an Airflow connection (type ``raylift_cluster``), as an AWS account is an ``aws_conn_id``.

Why: a Ray token is code execution on its cluster (the Jobs API). It must go only to the hosts of the cluster it
belongs to, which a Params-supplied URL cannot promise: anyone allowed to trigger a run could point it at their
own server. So the connection holds, together, how to reach the cluster and its credential:

* ``extra.kind``: ``local``, ``ray``, ``ecs`` or ``eks`` (which raylift target drives it);
* the target's own options as ``extra`` keys: ``dashboard_url`` and ``serve_url`` (``ray``), ``cluster_name``,
  ``cloud_map_namespace``, ``region_name``, ``bucket``... (``ecs``/``eks``), ``model_store`` (its state store);
* ``extra.redeploy``: whether scheduled and asset-triggered redeploys run for this cluster (default false);
* ``extra.allow_remote_code``: whether runs on it may set engine args that run a model repo's own code
  (``trust_remote_code`` ...; default false; ``raylift.targets.base.REMOTE_CODE_ENGINE_ARGS``);
* the **password**: the cluster's Ray token (``RAY_AUTH_TOKEN`` on the cluster's side).

The connection's form fields are declared in ``raylift.provider`` (Airflow's ``conn-fields``); the Airflow UI's
connection form stores them as extras under their own names, which this module reads (Airflow's older
``extra__raylift_cluster__<name>`` spelling too).
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from airflow.sdk.bases.hook import BaseHook

from raylift.config import strict_flag
from raylift.errors import CredentialsError, RayliftValueError
from raylift.secrets import SECRET_NAME, clean_field, mask

CONN_TYPE = "raylift_cluster"
KINDS = ("local", "ray", "ecs", "eks")
# extras that are the connection's own, not target options
CONTROL_KEYS = ("kind", "redeploy", "allow_remote_code")
# target options that say where the cluster is (and so where its token goes): a run's Params never set these
# when a connection names the cluster
REACH_KEYS = frozenset({
    "dashboard_url", "serve_url",  # ray
    "cluster", "head_address", "cloud_map_namespace", "cloud_map_service", "dashboard_port", "serve_port",
    "endpoint",  # ecs
    "cluster_name", "namespace", "rayservice_name", "kubernetes_conn_id", "worker_nodegroup", "head_nodegroup",  # eks
    "head_service", "worker_service",  # ecs services
    "aws_conn_id", "region_name", "bucket", "state_prefix", "model_prefix", "model_store",  # where state lives
})


class ClusterConnectionError(RayliftValueError):
    """A ``raylift_cluster`` connection is missing, of another type, or holds a value raylift cannot use."""


URL_KEYS = ("dashboard_url", "serve_url", "head_address", "endpoint")
#: the Airflow Variable naming which cluster connections each DAG may deploy to (README, "Clusters are Airflow
#: connections"): ``{"<dag_id>": ["<conn id>", ...], "*": [...]}`` or a list for every DAG; absent: any
ALLOW_LIST_VARIABLE = "raylift_allowed_cluster_conns"


def origin(url: str) -> str:
    """``scheme://host:port`` of ``url`` (the port made explicit), for comparing where a request goes."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    port = parts.port or (443 if scheme == "https" else 80)
    return f"{scheme}://{(parts.hostname or '').lower()}:{port}"


def normalise_url(url: str) -> str:
    """One spelling of where ``url`` points: scheme and host lower-cased, the default port made explicit, repeated
    and trailing ``/`` removed (``HTTP://Ray-Dev/`` -> ``http://ray-dev:80``). A host name and its IP address stay
    two spellings: telling them apart needs DNS, which a connection's parse does not do."""
    if "://" not in url:
        return url.rstrip("/")
    parts = urlsplit(url.strip())
    path = re.sub(r"/{2,}", "/", parts.path).rstrip("/")
    query = f"?{parts.query}" if parts.query else ""
    return f"{origin(url)}{path}{query}"


def check_store_uri(value: Any, *, where: str) -> None:
    """Refuse a relative ``model_store``: it would resolve against whichever folder a worker runs in, so two
    workers (or two runs) would keep one cluster's models, release state and lease in different places."""
    if isinstance(value, str) and "://" not in value and not os.path.isabs(value):
        raise RayliftValueError(
            f"{where}model_store {value!r} is a relative path: give an absolute folder (/srv/raylift/models) or an "
            "s3:// prefix, so every worker keeps this cluster's models, release state and lease in one place."
        )


def store_location(value: str) -> str:
    """One spelling of where a model store is, for comparing it: ``s3://bucket/prefix`` without repeated or trailing
    ``/``; else the local folder as ``raylift.store.LocalStore`` opens it (``file://`` dropped, ``~`` expanded,
    symlinks resolved)."""
    if value.startswith("s3://"):
        return "s3://" + re.sub(r"/{2,}", "/", value[len("s3://"):]).strip("/")
    return str(Path(value.removeprefix("file://")).expanduser().resolve())


def _within(inner: str, outer: str) -> bool:
    """Whether ``inner`` is ``outer`` or lies under it (path segments, never a string prefix: /a/bc is not in /a/b)."""
    return inner == outer or inner.startswith(outer.rstrip("/") + "/")


def airflow_code_folders() -> dict[str, str]:
    """The folders Airflow imports code from on this worker: ``[core] dags_folder`` and ``plugins_folder`` (as
    ``store_location`` spells them), by setting name."""
    from airflow.providers.common.compat.sdk import conf

    folders: dict[str, str] = {}
    for key in ("dags_folder", "plugins_folder"):
        try:
            value = conf.get("core", key, fallback=None)
        except Exception:  # noqa: BLE001 - a setting Airflow cannot read names no folder to keep out of
            value = None
        if value and str(value).strip():
            folders[f"[core] {key}"] = store_location(str(value).strip())
    return folders


def check_model_store(value: str | None, *, where: str, from_params: bool, default: str | None = None) -> None:
    """Refuse a model store raylift must not write to, before anything is written.

    Never inside Airflow's DAGs or plugins folder, nor holding one (a staged hub or S3 repo's ``*.py`` files would
    land where Airflow imports code), whoever named it. One from a run's Params (``from_params``) must also be the
    target's ``default`` store or lie under a root of ``RAYLIFT_ALLOWED_MODEL_STORES``: where raylift writes is
    decided by whoever runs Airflow (the worker's settings) or edits connections, not by whoever may trigger."""
    from raylift.config import ALLOWED_MODEL_STORES_ENV, allowed_model_stores

    if not isinstance(value, str) or not value:
        return
    here = store_location(value)
    if not here.startswith("s3://"):
        for setting, folder in airflow_code_folders().items():
            if _within(here, folder) or _within(folder, here):
                how = "lies inside" if _within(here, folder) else "holds"
                raise RayliftValueError(
                    f"{where}model_store {value!r} ({here}) {how} Airflow's {setting} {folder}: a staged model's "
                    "files (a hub or S3 repo's *.py among them) would land where Airflow imports code. Give a "
                    "folder outside Airflow's DAGs and plugins folders. Nothing was written."
                )
    if not from_params or (default is not None and here == store_location(default)):
        return
    roots = allowed_model_stores()
    if any(_within(here, store_location(root)) for root in roots):
        return
    raise RayliftValueError(
        f"{where}model_store {value!r} came from this run's Params, and where raylift writes is not the trigger's "
        f"choice: it is neither this target's default store ({default}) nor under a root of "
        f"{ALLOWED_MODEL_STORES_ENV} ({', '.join(roots) if roots else 'unset on this worker'}). Leave model_store "
        "out, name a raylift_cluster connection whose model_store it is (the cluster_conn_id Param), or ask "
        f"whoever runs Airflow to add a root holding it to {ALLOWED_MODEL_STORES_ENV} on the workers. Nothing was "
        "written."
    )


def check_bucket_writes(locations: dict[str, str], *, target: str) -> None:
    """Refuse a Params-only ``ecs``/``eks`` run whose options point raylift's S3 writes (``locations``: by the options
    that name them) outside the roots of ``RAYLIFT_ALLOWED_MODEL_STORES``, before anything is written. The worker's
    role may write more than raylift should (on MWAA, the environment's own bucket: its ``dags/`` prefix, plugins
    and requirements), so whoever runs Airflow names the prefixes; a cluster connection's options are allowed as
    they are."""
    from raylift.config import ALLOWED_MODEL_STORES_ENV, allowed_model_stores

    roots = [store_location(root) for root in allowed_model_stores() if root.startswith("s3://")]
    outside = {name: uri for name, uri in locations.items()
               if not any(_within(store_location(uri), root) for root in roots)}
    if not outside:
        return
    where = ", ".join(f"{name} = {uri}" for name, uri in outside.items())
    raise RayliftValueError(
        f"target_options of this {target} run came from its Params, and where raylift writes is not the trigger's "
        f"choice: {where} {'is' if len(outside) == 1 else 'are'} not under an s3:// root of "
        f"{ALLOWED_MODEL_STORES_ENV} ({', '.join(roots) if roots else 'none set on this worker'}). Name a "
        "raylift_cluster connection whose bucket it is (the cluster_conn_id Param; tools/tf_outputs_to_airflow.py "
        f"writes one from the terraform stack), or ask whoever runs Airflow to add the bucket (s3://<bucket>) or "
        f"its prefixes to {ALLOWED_MODEL_STORES_ENV} on the workers. Nothing was written."
    )


def canonical_host(host: str) -> str:
    """One spelling of a host: lower-case, the trailing dot of a fully qualified name dropped, an international name
    in its IDNA (``xn--``) form, an IP address in its compressed form (``::ffff:10.0.0.1`` is ``10.0.0.1``)."""
    name = host.strip().strip("[]").lower().rstrip(".")
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        try:
            return name.encode("idna").decode("ascii")
        except UnicodeError:
            return name
    mapped = getattr(address, "ipv4_mapped", None)
    return str(mapped or address)


def host_port(url: str) -> tuple[str, int]:
    """Where ``url`` points, whatever its scheme says about how: its canonical host and its port (the scheme's
    default made explicit: ``https://Host.`` is ``host``, 443)."""
    parts = urlsplit(url.strip() if "://" in url else f"http://{url.strip()}")
    port = parts.port or (443 if parts.scheme.lower() in ("https", "wss") else 80)
    return canonical_host(parts.hostname or ""), port


def location(kind: str, options: dict[str, Any]) -> tuple[str, ...] | None:
    """Where a cluster of ``kind`` with ``options`` is, in one spelling (None: not known from the options alone,
    or ``local``, this worker's own cluster). Two connections with one location point at one cluster. Only what
    says where the cluster is counts, never how it is reached: a ``ray`` cluster is its dashboard's host and port
    (``canonical_host``; ``http``/``https`` only default the port), ``ecs`` its region and cluster, ``eks`` its
    region, cluster, namespace and RayService (their defaults made explicit); never ``aws_conn_id``,
    ``serve_url`` or ``kubernetes_conn_id``."""
    def opt(name: str, default: str = "") -> str:
        value = options.get(name)
        return str(value).strip().lower() if value not in (None, "") else default

    if kind == "ray" and isinstance(options.get("dashboard_url"), str):
        host, port = host_port(options["dashboard_url"])
        return ("ray", host, str(port))
    if kind == "ecs" and options.get("cluster"):
        return ("ecs", opt("region_name"), opt("cluster"))
    if kind == "eks" and options.get("cluster_name"):
        return ("eks", opt("region_name"), opt("cluster_name"), opt("namespace", "raylift"),
                opt("rayservice_name", "raylift"))
    return None


def _addresses(host: str, port: str) -> frozenset[str]:
    """The addresses ``host`` resolves to (itself, canonical, when it does not resolve)."""
    try:
        infos = socket.getaddrinfo(host, int(port), proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError, ValueError):
        return frozenset({host})
    return frozenset(canonical_host(str(info[4][0])) for info in infos)


def same_place(a: tuple[str, ...] | None, b: tuple[str, ...] | None) -> bool:
    """Whether two locations are one cluster: the same spelling, or (``ray``) the same port on hosts that resolve
    to a common address (a name and its IP address, two names of one host)."""
    if a is None or b is None:
        return False
    if a == b:
        return True
    if a[0] != "ray" or b[0] != "ray" or a[2] != b[2]:
        return False
    return bool(_addresses(a[1], a[2]) & _addresses(b[1], b[2]))


#: options that say how a cluster is reached or where its state lives, not where it is: they never move its identity
HOW_KEYS = frozenset({"aws_conn_id", "serve_url", "kubernetes_conn_id"})


@dataclass(frozen=True)
class ClusterConnection:
    """What a ``raylift_cluster`` connection says. The token is kept out of ``repr`` (logs, tracebacks)."""

    conn_id: str
    kind: str
    options: dict[str, Any]
    redeploy: bool = False
    token: str | None = field(default=None, repr=False)
    #: whether a run on this cluster may set engine args that run a model repo's own code (``trust_remote_code``...)
    allow_remote_code: bool = False

    @property
    def location(self) -> tuple[str, ...] | None:
        """Where this connection's cluster is (``location``), for refusing a second connection to it."""
        return location(self.kind, self.options)

    @property
    def identity(self) -> str:
        """The cluster's identity for release state and the writer lease: the connection id plus a digest of where
        the cluster is (``location``: not how it is reached, so an edit of ``aws_conn_id`` or ``serve_url`` keeps
        it, and ``https://Host.:443`` is ``https://host``). Where the options do not say where it is (``local``),
        the digest is of what they say but ``HOW_KEYS``. A connection re-pointed at another cluster gets another
        identity, so it does not inherit that cluster's history; a restart of the same cluster keeps it."""
        where: Any = self.location
        if where is None:
            where = [self.kind, {k: v for k, v in sorted(self.options.items()) if k in REACH_KEYS - HOW_KEYS}]
        digest = hashlib.sha256(json.dumps(where, sort_keys=True).encode()).hexdigest()[:12]
        return f"{self.conn_id}@{digest}"

    def token_origins(self) -> frozenset[str]:
        """Where this connection's token may be sent: the origins of its own URLs."""
        urls = [self.options[k] for k in ("dashboard_url", "head_address") if isinstance(self.options.get(k), str)]
        return frozenset(origin(u) for u in urls if "://" in u)


def _extras(conn_id: str, conn: Any) -> dict[str, Any]:
    """The connection's extras under their own names, string values trimmed and checked (``clean_field``), any
    whose name says secret masked, and URLs in one spelling (``normalise_url``)."""
    extra = conn.extra_dejson if hasattr(conn, "extra_dejson") else json.loads(conn.extra or "{}")
    prefix = f"extra__{CONN_TYPE}__"
    out: dict[str, Any] = {}
    for key, value in dict(extra).items():
        name = key[len(prefix):] if key.startswith(prefix) else key
        if isinstance(value, str):
            value = clean_field(value, where=f"Airflow connection {conn_id!r}", field=f"extra {name!r}",
                                secret=bool(SECRET_NAME.search(name)))
            if value is not None and name in URL_KEYS:
                value = normalise_url(value)
        if value in (None, ""):  # a form field left empty
            continue
        out[name] = value
    return out


def parse_connection(conn_id: str, conn: Any) -> ClusterConnection:
    """A ``ClusterConnection`` from an Airflow connection object, or ClusterConnectionError naming the field."""
    if conn.conn_type != CONN_TYPE:
        raise ClusterConnectionError(
            f"Airflow connection {conn_id!r} is of type {conn.conn_type!r}, not {CONN_TYPE!r}: a cluster Param names "
            f"a raylift cluster connection (airflow connections add {conn_id} --conn-type {CONN_TYPE} ...)."
        )
    where = f"Airflow connection {conn_id!r}"
    token = clean_field(conn.password, where=where, field="password (the Ray token)", secret=True)
    for name in ("login", "host"):
        clean_field(getattr(conn, name, None), where=where, field=name)
    extras = _extras(conn_id, conn)
    kind = extras.pop("kind", None)
    if kind not in KINDS:
        raise ClusterConnectionError(
            f"Airflow connection {conn_id!r} has kind {kind!r}: set its extra 'kind' to one of {list(KINDS)}."
        )
    flags: dict[str, bool] = {}
    for name in ("redeploy", "allow_remote_code"):
        value = extras.pop(name, False)
        try:  # strictly: "maybe" is refused, never read as false
            flags[name] = strict_flag(value, f"Airflow connection {conn_id!r}: extra {name!r}", False)
        except RayliftValueError:
            raise ClusterConnectionError(
                f"Airflow connection {conn_id!r}: extra {name!r} must be true or false (got {value!r})."
            ) from None
    check_store_uri(extras.get("model_store"), where=f"{where}: its extra ")
    return ClusterConnection(conn_id=conn_id, kind=str(kind), options=extras, redeploy=flags["redeploy"],
                             token=token, allow_remote_code=flags["allow_remote_code"])


def _env_connection_ids() -> list[str]:
    """The connection ids Airflow reads from this worker's environment (``AIRFLOW_CONN_<ID>``)."""
    prefix = "AIRFLOW_CONN_"
    return [name[len(prefix):].lower() for name in os.environ if name.startswith(prefix) and len(name) > len(prefix)]


def known_clusters(also: Iterable[str] = ()) -> list[ClusterConnection]:
    """The ``raylift_cluster`` connections this worker can see without listing the metadata database (which Airflow
    3's task API does not offer): those in its environment, those the allow-list names, and ``also``."""
    ids = dict.fromkeys([*_env_connection_ids(), *allowed_everywhere(), *also])
    found: list[ClusterConnection] = []
    for conn_id in ids:
        try:
            conn = BaseHook.get_connection(conn_id)
            if conn.conn_type == CONN_TYPE:
                found.append(parse_connection(conn_id, conn))
        except Exception:  # noqa: BLE001 - a connection that does not parse is refused when a run names it
            continue
    return found


def check_sole_owner(cluster: ClusterConnection) -> None:
    """Refuse ``cluster`` when another connection points at the same cluster: two ids would give one cluster two
    identities, two writer leases and two release histories."""
    where = cluster.location
    if where is None:
        return
    for other in known_clusters():
        if other.conn_id != cluster.conn_id and same_place(other.location, where):
            first, second = sorted((cluster.conn_id, other.conn_id))
            raise ClusterConnectionError(
                f"Airflow connections {first!r} and {second!r} point at the same cluster ({', '.join(where)}): "
                f"one cluster has one identity, one writer lease and one release history, so keep one (the one "
                f"your runs and its release state already use) and delete the other. Nothing was sent."
            )


#: where a state store records which connection owns each cluster it keeps state for (``claim_cluster``)
OWNERS_PREFIX = "_raylift/clusters"


def claim_cluster(cluster: ClusterConnection, store: Any) -> None:
    """Refuse ``cluster`` when another connection, wherever Airflow keeps it, already drives the same cluster;
    else record it as the cluster's connection in ``store`` (its state store).

    Why: ``check_sole_owner`` sees only the connections this worker can list (``AIRFLOW_CONN_*``, the allow-list),
    and Airflow offers no listing of those in the metadata database or a secrets backend (a worker reads a
    connection by its id only: ``BaseHook.get_connection``, through the Task Execution API or each backend's
    ``get_connection``). So the first connection to use a cluster is recorded under the cluster's location
    (``<OWNERS_PREFIX>/<digest>.json``), and another id at that location is refused while the recorded one still
    exists and still points there (looked up by its id, in any backend); a recorded connection that was deleted
    or re-pointed hands the cluster over."""
    where = cluster.location
    if where is None:
        return
    key = f"{OWNERS_PREFIX}/{hashlib.sha256(json.dumps(list(where)).encode()).hexdigest()[:16]}.json"
    claim = store.read_json(key)
    owner = claim.get("conn_id") if isinstance(claim, dict) else None
    if owner == cluster.conn_id:
        return
    if isinstance(owner, str):
        try:
            held: ClusterConnection | None = parse_connection(owner, BaseHook.get_connection(owner))
        except Exception:  # noqa: BLE001 - deleted, or no longer a cluster connection: it owns nothing
            held = None
        if held is not None and same_place(held.location, where):
            first, second = sorted((cluster.conn_id, owner))
            raise ClusterConnectionError(
                f"Airflow connections {first!r} and {second!r} point at the same cluster ({', '.join(where)}; "
                f"{owner!r} drives it, as recorded in its state store under {key}): one cluster has one identity, "
                "one writer lease and one release history, so keep one (the one its runs already use) and delete "
                "the other, wherever it is stored (metadata database, secrets backend, environment). Nothing was sent."
            )
    store.write_json(key, {"conn_id": cluster.conn_id, "location": list(where)})


def check_unowned(kind: str, options: dict[str, Any]) -> None:
    """Refuse a Params-only run (no ``cluster_conn_id``) at a cluster a connection owns: it would run beside that
    connection's lease and history under another identity."""
    where = location(kind, {k: normalise_url(v) if k in URL_KEYS and isinstance(v, str) else v
                            for k, v in options.items()})
    if where is None:
        return
    for other in known_clusters():
        if same_place(other.location, where):
            raise ClusterConnectionError(
                f"This run's target_options point at the cluster of Airflow connection {other.conn_id!r} "
                f"({', '.join(where)}): set the cluster_conn_id Param to {other.conn_id!r} (and drop those "
                "target_options) so the run holds that cluster's lease and keeps its history. Nothing was sent."
            )


def _allow_list() -> Any:
    from airflow.sdk import Variable

    try:
        return Variable.get(ALLOW_LIST_VARIABLE, default=None, deserialize_json=True)
    except Exception as exc:  # noqa: BLE001 - an unreadable variable must refuse, not open the gate
        if "not found" in str(exc).lower() or "does not exist" in str(exc).lower():
            return None
        raise ClusterConnectionError(
            f"Airflow Variable {ALLOW_LIST_VARIABLE!r} is not valid JSON ({type(exc).__name__}): set it to "
            '{"<dag_id>": ["<connection id>", ...]} or a list of connection ids.'
        ) from None


def allowed_everywhere() -> list[str]:
    """Every connection id the allow-list names (for ``known_clusters``)."""
    allowed = _allow_list()
    if isinstance(allowed, dict):
        return [str(c) for ids in allowed.values() if isinstance(ids, list) for c in ids]
    return [str(c) for c in allowed] if isinstance(allowed, list) else []


def check_allowed(conn_id: str, dag_id: str | None) -> None:
    """Refuse a cluster connection the allow-list (``ALLOW_LIST_VARIABLE``) does not give DAG ``dag_id``. No
    variable: every connection is allowed (raylift's behaviour before the list)."""
    allowed = _allow_list()
    if allowed is None:
        return
    if isinstance(allowed, dict):
        ids = allowed.get(dag_id or "", allowed.get("*", []))
        scope = f"DAG {dag_id!r}"
    else:
        ids, scope = allowed, "every DAG"
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ClusterConnectionError(
            f"Airflow Variable {ALLOW_LIST_VARIABLE!r} must map each DAG id to a list of connection ids "
            '({"raylift_deploy": ["dev", "prod"]}) or be one such list.'
        )
    if conn_id not in ids:
        raise CredentialsError(
            f"Cluster connection {conn_id!r} is not in Airflow Variable {ALLOW_LIST_VARIABLE!r} for {scope} "
            f"(allowed: {sorted(ids)}): name an allowed connection, or ask whoever runs Airflow to add it. "
            "Nothing was sent."
        )


class RayliftClusterHook(BaseHook):
    """Reads a ``raylift_cluster`` connection. Its form fields are declared in the provider info."""

    conn_name_attr = "cluster_conn_id"
    default_conn_name = "raylift_cluster_default"
    conn_type = CONN_TYPE
    hook_name = "raylift cluster (Ray Serve + vLLM)"

    def __init__(self, cluster_conn_id: str) -> None:
        super().__init__()
        self.cluster_conn_id = cluster_conn_id

    # Airflow 3.2+ reads the form from the provider info's ``conn-fields`` and never calls these; Airflow 3.1 reads
    # only these. Both come from raylift.provider.CLUSTER_CONN_FIELDS, so the two forms cannot drift apart.
    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """The connection form's extra fields, for Airflow 3.1 (wtforms, as the Apache providers' hooks declare them)."""
        from raylift.provider import form_widgets

        return form_widgets()

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Hidden and relabelled standard fields, for Airflow 3.1 (its hook method spells the keys with ``_``
        where the provider info spells them with ``-``)."""
        from raylift.provider import UI_FIELD_BEHAVIOUR

        return {key.replace("-", "_"): value for key, value in UI_FIELD_BEHAVIOUR.items()}

    def cluster(self) -> ClusterConnection:
        try:
            conn = self.get_connection(self.cluster_conn_id)
        except Exception as exc:  # Airflow raises its own "not defined" error type, which differs by version
            if "isn't defined" not in str(exc) and "not defined" not in str(exc) and "not found" not in str(exc):
                raise
            raise ClusterConnectionError(
                f"No Airflow connection {self.cluster_conn_id!r}: add it (airflow connections add "
                f"{self.cluster_conn_id} --conn-type {CONN_TYPE} --conn-extra '{{\"kind\": \"ray\", ...}}'), "
                "or leave the cluster_conn_id Param empty to deploy on the local target."
            ) from None
        cluster = parse_connection(self.cluster_conn_id, conn)
        mask(cluster.token)
        return cluster
