#!/bin/sh
# The image's entry point (installed as /usr/local/bin/suite-entrypoint).
#
#   IMAGE FILE.yaml [OPTIONS]   ->  suite run FILE.yaml [OPTIONS]   (so `docker compose run suite FILE` runs it)
#   IMAGE --exec CMD [ARGS]     ->  CMD ARGS                        (torchrun, ray start, python ...)
#   IMAGE ARGS                  ->  suite ARGS                      (plan, validate, report, ...)
#
# Ownership of results: started as root (compose does that), it drops to the uid:gid that owns the results
# folder (/workspace/results, or $SUITE_RESULTS_OWNER_OF), so the files on the host belong to whoever owns ./results.
# If that owner is root (a root host user) it stays root; started as any other user it changes nothing.
set -eu
owner_of=${SUITE_RESULTS_OWNER_OF:-/workspace/results}
if [ "$(id -u)" = 0 ] && [ -d "$owner_of" ]; then
  uid=$(stat -c %u "$owner_of")
  gid=$(stat -c %g "$owner_of")
  if [ "$uid" != 0 ]; then
    exec setpriv --reuid="$uid" --regid="$gid" --clear-groups -- "$0" "$@"
  fi
fi
# The image digest for the manifest (suite.results.env reads SUITE_IMAGE_DIGEST): compose passes the one
# scripts/docker-setup recorded; keep it only if it was recorded for this very build.
if [ -n "${SUITE_IMAGE_BUILD_ID:-}" ] && [ "${SUITE_IMAGE_BUILD_ID}" != "${SUITE_BUILD_ID:-}" ]; then
  echo "suite-entrypoint: compose/.image.env describes another build; the image digest is not recorded" \
       "(rebuild with scripts/docker-setup)" >&2
  unset SUITE_IMAGE_DIGEST
fi
# A Ray driver must run on a node of the cluster: with SUITE_RAY_JOIN=HEAD:PORT (the suite-ray service) this
# container first joins the cluster as a node without CPUs (no training work lands here), then runs the command.
# Ray gives a node 30 s to register (hard-coded); a loaded machine can miss that, so try three times.
if [ -n "${SUITE_RAY_JOIN:-}" ]; then
  for attempt in 1 2 3; do
    if timeout 120 ray start --address="$SUITE_RAY_JOIN" --num-cpus=0 --disable-usage-stats \
         --object-store-memory="${RAY_OBJECT_STORE_BYTES:-200000000}" >/tmp/ray-join.log 2>&1; then
      break
    fi
    ray stop --force >/dev/null 2>&1 || true   # this container's Ray processes only (own PID namespace)
    [ "$attempt" -lt 3 ] || { cat /tmp/ray-join.log >&2; exit 1; }
  done
fi
case "${1:-}" in
  --exec) shift; exec "$@" ;;
  *.yaml|*.yml) exec suite run "$@" ;;
  *) exec suite "$@" ;;
esac
