"""Lane image build time: from nothing (no layers of it cached) and from the layer cache.

Wheels stay cached on the host between runs (they are downloaded once per version).
With --base, also times building Osprey's Debian base image with debootstrap (about a minute).
"""

from __future__ import annotations

import sys
import time

from osprey.toolservice.images import build_base, docker_client, ensure_image, image_tag


def main() -> None:
    client = docker_client()
    if "--base" in sys.argv:
        start = time.perf_counter()
        build_base(client, tag="osprey-base:bench")
        print(f"base image (debootstrap + import): {time.perf_counter() - start:.1f} s")
        client.images.remove("osprey-base:bench")
    tag, _ = image_tag(client, None)
    try:
        client.images.remove(tag, force=True)  # dangling parent layers go with it
    except Exception:  # noqa: BLE001 - it may not exist
        pass
    start = time.perf_counter()
    ensure_image(client)
    print(f"lane image from nothing (base present): {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    ensure_image(client, force=True)
    print(f"lane image rebuilt from the layer cache: {time.perf_counter() - start:.1f} s")
    start = time.perf_counter()
    ensure_image(client)
    print(f"lane image present (tag check only): {(time.perf_counter() - start) * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
