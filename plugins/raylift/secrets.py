"""Secrets as raylift reads and hands them on: trimmed and checked when read, masked in every printed form, and
kept out of the processes that load user code.

Why: a token pasted with its trailing newline made every dashboard poll fail with httpx's
``Illegal header value b'Bearer <token>\\n'``, a form Airflow's masker (which knew only the raw value) let through;
and a subprocess that imports a model's code inherited the worker's whole environment (Ray token, AWS keys,
Airflow's JWT secret, ``AIRFLOW_CONN_*``).
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections.abc import Mapping

from raylift.errors import CredentialsError

# what a process that loads user or model code may inherit: names, then prefixes. Anything else (and any name that
# looks like a credential, even under an allowed prefix) is left out.
CHILD_ENV_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR", "TEMP", "TMP",
    "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
    "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "NVIDIA_VISIBLE_DEVICES", "OMP_NUM_THREADS",
    "MKL_NUM_THREADS", "TOKENIZERS_PARALLELISM", "TRANSFORMERS_CACHE", "TRANSFORMERS_OFFLINE", "TORCH_HOME",
    "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE",
    "NEURON_RT_VISIBLE_CORES", "NEURON_COMPILE_CACHE_URL",
})
CHILD_ENV_PREFIXES = ("LC_", "VLLM_", "HF_", "RAYLIFT_", "NEURON_")
SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE|API_?KEY|ACCESS_KEY|AUTH|COOKIE|SESSION",
                         re.IGNORECASE)


def child_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a subprocess that loads user or model code: an allow-list of what it needs (``PATH``,
    ``HOME``, locale, the venv, ``VLLM_*`` / ``HF_*`` / ``RAYLIFT_*`` settings), never a name that looks like a
    credential (``*TOKEN*``, ``*SECRET*``, ``*PASSWORD*``...; so no ``RAY_AUTH_TOKEN``, ``AWS_*`` keys,
    ``AIRFLOW_*`` including ``AIRFLOW_CONN_*`` and the JWT secret, ``HF_TOKEN``)."""
    source = os.environ if environ is None else environ
    return {
        name: value for name, value in source.items()
        if (name in CHILD_ENV_NAMES or name.startswith(CHILD_ENV_PREFIXES)) and not SECRET_NAME.search(name)
    }


def printed_forms(secret: str) -> list[str]:
    """Every form ``secret`` can reach a log line in: raw, stripped, ``repr``/escaped (``'tok\\n'`` and the bytes
    repr httpx prints), JSON-escaped."""
    forms = {secret, secret.strip()}
    for value in (secret, secret.strip()):
        forms.add(repr(value)[1:-1])
        forms.add(repr(value.encode("utf-8", "backslashreplace"))[2:-1])
        forms.add(json.dumps(value)[1:-1])
    return sorted(f for f in forms if f)


def mask(secret: str | None) -> None:
    """Register ``secret`` with Airflow's own secrets masker (the one task logs go through), in each printed form."""
    if not secret:
        return
    from airflow.sdk.log import mask_secret

    for form in printed_forms(secret):
        mask_secret(form)


def _control_chars(value: str) -> bool:
    return any(unicodedata.category(ch) == "Cc" for ch in value)


def clean_field(value: str | None, *, where: str, field: str, secret: bool = False) -> str | None:
    """A connection field as raylift uses it: surrounding whitespace (a pasted trailing newline) trimmed; an empty
    value is None; any control character left inside refused, naming ``where`` it came from (``Airflow connection
    'dev'``) and the field, never the value.
    ``secret``: registered with Airflow's masker first (raw and every escaped form), so not even the refusal's
    traceback can print it."""
    if value is None:
        return None
    if secret:
        mask(value)
    cleaned = value.strip()
    if _control_chars(cleaned):
        raise CredentialsError(
            f"{where}: its {field} holds a control character inside the value (not only "
            "surrounding whitespace, which raylift trims): re-enter it without the stray character. "
            "Nothing was sent."
        )
    return cleaned or None


def check_conn_type(conn_id: str, conn_type: str | None, *, field: str, kinds: tuple[str, ...], needs: str) -> None:
    """Refuse a connection named by ``field`` (a Param) that is not of the kind the field needs, before anything is
    sent: naming the connection, its type and the types accepted."""
    if conn_type not in kinds:
        raise CredentialsError(
            f"{field} names Airflow connection {conn_id!r} of type {conn_type!r}, but {field} needs {needs} "
            f"(a connection of type {' or '.join(repr(k) for k in kinds)}): name such a connection. Nothing was sent."
        )


# the hub's own connection types only: a `generic` connection's password may be anything's (a database's, a webhook's),
# and naming it as hf_conn_id would send it to the hub endpoint
HUB_TOKEN_CONN_TYPES = ("huggingface", "hf")
AWS_CONN_TYPES = ("aws",)


__all__ = ["AWS_CONN_TYPES", "HUB_TOKEN_CONN_TYPES", "CHILD_ENV_NAMES", "CHILD_ENV_PREFIXES", "check_conn_type", "child_env", "clean_field", "mask",
           "printed_forms"]
