#!/usr/bin/env bash
# The KubeRay CRDs the tests validate rendered RayService / RayCluster manifests against (tests/fixtures/kuberay_crd.py):
# find them, or fetch the pinned ones of the KubeRay release raylift deploys, and print their folder on stdout (the
# only thing printed there: `RAYLIFT_KUBERAY_CRDS=$(bash tools/kuberay_crds.sh)`). Messages go to stderr.
#
# Where, in order:
#   1. $RAYLIFT_KUBERAY_CRDS, when set: it must hold them (never silently replaced by another copy);
#   2. <repo>/../shared/reference/kuberay, when present (the reference copy beside this checkout), each needed file's
#      sha256 checked against the pins below as a fetched one is;
#   3. $RAYLIFT_CACHE/kuberay-crds: fetched here before, each file's sha256 checked against the pins below;
#   4. else fetched from KubeRay's repository at the release tag into (3), each checked before it is kept.
# When none of these works (no copy, and GitHub cannot be reached), it stops with one message naming
# RAYLIFT_KUBERAY_CRDS and what to do, exit 1: the tests then never start, rather than ~50 of them failing one by one.
# A file whose sha256 is not the pinned one is refused (exit 2), in the reference copy, fetched or cached.
#
# KUBERAY_CRDS_URL overrides where they are fetched from (a mirror; the tests point it at an unreachable host).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"

# The release raylift deploys: terraform/modules/eks_ray's kuberay_operator_version (tests/infra checks they agree).
KUBERAY_VERSION=v1.7.0
KUBERAY_CRDS_URL=${KUBERAY_CRDS_URL:-https://raw.githubusercontent.com/ray-project/kuberay/$KUBERAY_VERSION/ray-operator/config/crd/bases}
# sha256 of each file at that tag (commit feeaf72facab4881ba2b179248bb67315634e229, the release ../shared/reference/kuberay
# holds too), as GitHub serves it raw. v1.7.0, not 1.5.1: raylift renders authOptions.secretName, which KubeRay's
# RayService CRD has from v1.6.0 on (1.5.1's refused the manifest's Ray token Secret).
declare -A PINNED=(
  [ray.io_rayservices.yaml]=0a8fc325e6e22b9231c1f282b309555e2ecf94227ca20a03df3d1d9a403907ab
  [ray.io_rayclusters.yaml]=c44704442eef0c6721ad40c1d66782c8bd3fdab9d3344306a5820910a679baa1
)
FETCHED=(ray.io_rayservices.yaml ray.io_rayclusters.yaml)
NEEDED=(ray.io_rayservices.yaml ray.io_rayclusters.yaml)  # what the tests read (a copy without rayjobs serves)
SHARED=$(realpath -m "$RAYLIFT_ROOT/../shared/reference/kuberay")
CACHE=$RAYLIFT_CACHE/kuberay-crds

holds_crds() {  # holds_crds DIR: every needed file is there and is a CustomResourceDefinition
  local f
  for f in "${NEEDED[@]}"; do
    [ -s "$1/$f" ] && grep -q '^kind: CustomResourceDefinition' "$1/$f" || return 1
  done
}

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

refuse_checksum() {  # refuse_checksum FILE WHAT WHAT-TO-DO
  local name got
  name=$(basename "$1")
  got=$(sha_of "$1")
  echo "kuberay_crds: $2 $name has sha256 $got, not KubeRay $KUBERAY_VERSION's pinned ${PINNED[$name]}" \
    "(tools/kuberay_crds.sh): refused. $3, or set RAYLIFT_KUBERAY_CRDS to a folder holding KubeRay's CRDs." >&2
  exit 2
}

if [ -n "${RAYLIFT_KUBERAY_CRDS:-}" ]; then
  if holds_crds "$RAYLIFT_KUBERAY_CRDS"; then
    (cd "$RAYLIFT_KUBERAY_CRDS" && pwd)
    exit 0
  fi
  echo "kuberay_crds: RAYLIFT_KUBERAY_CRDS=$RAYLIFT_KUBERAY_CRDS does not hold KubeRay's CRDs (${NEEDED[*]}):" \
    "point it at a folder that does, or unset it to use $SHARED or fetch KubeRay $KUBERAY_VERSION's." >&2
  exit 1
fi
if holds_crds "$SHARED"; then
  for f in "${NEEDED[@]}"; do  # the reference copy is used first: it must be the pinned release's, like a fetched one
    [ "$(sha_of "$SHARED/$f")" = "${PINNED[$f]}" ] || refuse_checksum "$SHARED/$f" "the reference copy" \
      "Replace it with KubeRay $KUBERAY_VERSION's file ($KUBERAY_CRDS_URL/$f) or remove $SHARED to fetch one"
  done
  echo "$SHARED"
  exit 0
fi
if [ -d "$CACHE" ] && holds_crds "$CACHE"; then
  for f in "${FETCHED[@]}"; do
    [ -f "$CACHE/$f" ] || continue
    [ "$(sha_of "$CACHE/$f")" = "${PINNED[$f]}" ] || refuse_checksum "$CACHE/$f" "the cached" \
      "Delete $CACHE and run tools/kuberay_crds.sh again to fetch it afresh"
  done
  echo "$CACHE"
  exit 0
fi

partial=$(mktemp -d "${TMPDIR:-/tmp}/kuberay-crds.XXXXXX")
trap 'rm -rf "$partial"' EXIT
for f in "${FETCHED[@]}"; do
  if ! error=$(curl --fail --silent --show-error --location --connect-timeout 10 --max-time 120 \
                 -o "$partial/$f" "$KUBERAY_CRDS_URL/$f" 2>&1); then
    echo "kuberay_crds: KubeRay's CRDs, which the tests validate RayService/RayCluster manifests against, are" \
      "not here and could not be fetched ($KUBERAY_CRDS_URL/$f: ${error:-curl failed})." \
      "Looked in RAYLIFT_KUBERAY_CRDS (unset), $SHARED and $CACHE." \
      "Set RAYLIFT_KUBERAY_CRDS to a folder holding KubeRay $KUBERAY_VERSION's ${FETCHED[*]}" \
      "(from $KUBERAY_CRDS_URL/, on a machine that reaches GitHub), or put them in $CACHE; then run the tests again." >&2
    exit 1
  fi
  [ "$(sha_of "$partial/$f")" = "${PINNED[$f]}" ] || refuse_checksum "$partial/$f" "$KUBERAY_CRDS_URL/$f:" \
    "Nothing was kept; check KUBERAY_CRDS_URL (it must serve KubeRay $KUBERAY_VERSION's files)"
done
mkdir -p "$CACHE"
for f in "${FETCHED[@]}"; do mv "$partial/$f" "$CACHE/$f"; done
say "kuberay_crds: fetched KubeRay $KUBERAY_VERSION's CRDs into $CACHE (sha256 checked)"
echo "$CACHE"
