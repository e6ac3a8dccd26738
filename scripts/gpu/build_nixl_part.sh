#!/usr/bin/env bash
# NIXL for the H200 payload (vLLM's NixlConnector imports `nixl._api`), as one extra part
# .gpu/nixl/nixl-site.tar.xz (~19 MB: fits one device call with the tree). nixl-cu13 1.5.1's wheel is 59 MB; its
# nixl_ep_cu13 expert-parallel builds (95 MB unpacked) and headers are not needed by the connector and are dropped.
# On the device: tar -C ~/phaseprof-payload/site -xJf .gpu/nixl/nixl-site.tar.xz
set -euo pipefail
work=${NIXL_WORK:-/tmp/nixl}
mkdir -p "$work" .gpu/nixl
python3 -m pip download -q --no-deps --python-version 3.12 --implementation cp --abi cp312 --only-binary=:all: \
  --platform manylinux_2_28_x86_64 --platform any -d "$work" nixl-cu13==1.5.1 nixl==1.5.1
rm -rf "$work/site"
python3 -m pip install -q --no-deps --no-compile --python-version 3.12 --implementation cp --abi cp312 \
  --only-binary=:all: --platform manylinux_2_28_x86_64 --platform any --target "$work/site" "$work"/*.whl
rm -rf "$work/site/nixl_ep" "$work/site/nixl_ep_cu13" "$work/site/include" "$work/site/pkgconfig"
tar -C "$work/site" -cf - . | xz -6 -T0 > .gpu/nixl/nixl-site.tar.xz
ls -la .gpu/nixl/nixl-site.tar.xz
