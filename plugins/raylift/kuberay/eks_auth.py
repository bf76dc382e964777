"""A kubeconfig dict for an EKS cluster with a fresh bearer token, from an Airflow AWS connection.

The provider's ``EksHook.generate_config_file`` writes an exec-plugin kubeconfig that shells out
for every token; a trigger runs on another host and must not block, so here the token is minted
once (a presigned STS ``GetCallerIdentity`` URL, as ``aws eks get-token`` does) with the provider's
``fetch_access_token_for_cluster`` and embedded. EKS tokens live 15 minutes: callers rebuild the
config before ``TOKEN_TTL_S``.
"""

from __future__ import annotations

from typing import Any

TOKEN_TTL_S = 14 * 60  # EKS accepts a token for 15 minutes; refresh a minute early


def eks_cluster_context(
    cluster_name: str, region: str, aws_conn_id: str | None = "aws_default"
) -> dict[str, Any]:
    """The JSON-able ``cluster_context`` the RayService trigger takes (no credentials in it)."""
    return {"eks_cluster_name": cluster_name, "region": region, "aws_conn_id": aws_conn_id}


def eks_kubeconfig(
    *,
    eks_cluster_name: str,
    region: str,
    aws_conn_id: str | None = "aws_default",
    namespace: str | None = None,
) -> dict[str, Any]:
    """Describe the cluster (endpoint + CA) and mint a token; blocking, run it in a thread from async code."""
    from airflow.providers.amazon.aws.hooks.eks import EksHook
    from airflow.providers.amazon.aws.utils.eks_get_token import fetch_access_token_for_cluster

    hook = EksHook(aws_conn_id=aws_conn_id, region_name=region)
    cluster = hook.describe_cluster(name=eks_cluster_name)["cluster"]
    session = hook.get_session(region_name=region)
    sts_url = f"https://sts.{region}.amazonaws.com/?Action=GetCallerIdentity&Version=2011-06-15"
    token = fetch_access_token_for_cluster(eks_cluster_name, sts_url, region_name=region, session=session)
    context: dict[str, Any] = {"cluster": eks_cluster_name, "user": "raylift"}
    if namespace:
        context["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": eks_cluster_name,
                "cluster": {
                    "server": cluster["endpoint"],
                    "certificate-authority-data": cluster["certificateAuthority"]["data"],
                },
            }
        ],
        "users": [{"name": "raylift", "user": {"token": token}}],
        "contexts": [{"name": eks_cluster_name, "context": context}],
        "current-context": eks_cluster_name,
    }
