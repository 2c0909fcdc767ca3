# The default Osprey lane image: the ToolService sidecar (osprey_sidecar with grpcio and
# protobuf only), bash, coreutils, findutils, git, ripgrep, python3 and tini for reaping zombies.
#
# Osprey builds it itself (`osprey sandbox build`) from a context holding this file,
# sidecar/osprey_sidecar/ and wheels/ (wheels downloaded on the host for the image's Python,
# because a build may not be able to reach a package index). BASE_IMAGE defaults to Osprey's
# own Debian base, built with debootstrap (images/build-base.sh); with a registry it can be
# debian:bookworm-slim or any Debian- or Ubuntu-based image of your own.
ARG BASE_IMAGE=osprey-base:bookworm

FROM ${BASE_IMAGE} AS tools
# A base that lacks a tool gets it from the distribution's packages; Osprey's own base has all.
RUN set -e; missing=; \
    for tool in bash git rg python3 tini find; do command -v "$tool" >/dev/null 2>&1 || missing=yes; done; \
    if [ -n "$missing" ]; then \
        apt-get update; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            bash coreutils findutils git ripgrep python3 tini ca-certificates; \
        rm -rf /var/lib/apt/lists/*; \
    fi

FROM tools AS lane
COPY wheels/ /opt/osprey/wheels/
RUN python3 -c "import glob, zipfile; [zipfile.ZipFile(w).extractall('/opt/osprey/lib') for w in sorted(glob.glob('/opt/osprey/wheels/*.whl'))]" \
    && rm -rf /opt/osprey/wheels
COPY sidecar/osprey_sidecar/ /opt/osprey/lib/osprey_sidecar/
# Bytecode compiled now: the lane's root is read-only, so nothing could cache it later and
# every start would compile grpc and protobuf again.
RUN python3 -m compileall -q /opt/osprey/lib \
    && python3 -c "import sys; sys.path.insert(0, '/opt/osprey/lib'); import grpc, osprey_sidecar.server"
# The socket dir's mount point: a named volume mounted here (compose.yaml) starts with this
# mode, so a lane running as any uid can create its socket and token there.
RUN mkdir -p /run/osprey && chmod 1777 /run/osprey
ENV PYTHONDONTWRITEBYTECODE=1 LANG=C.UTF-8
# The library path is put on sys.path here rather than in PYTHONPATH, so the python3 that
# the model's commands run does not see the sidecar's packages. -I: the working directory (the
# workspace) is not on sys.path, so no module there can shadow one the sidecar imports, and no
# PYTHON* variable counts; -S: no site directories to scan (the sidecar needs none); -B: the
# bytecode compiled above is all there is.
ENTRYPOINT ["/usr/bin/tini", "--", "python3", "-I", "-S", "-B", "-c", "import sys; sys.path.insert(0, '/opt/osprey/lib'); from osprey_sidecar.__main__ import main; sys.exit(main())"]

# A headless broker for compose.yaml: `osprey` itself, with its dependencies as wheels.
FROM lane AS broker
COPY broker-wheels/ /opt/osprey/broker-wheels/
RUN python3 -c "import glob, zipfile; [zipfile.ZipFile(w).extractall('/opt/osprey/broker') for w in sorted(glob.glob('/opt/osprey/broker-wheels/*.whl'))]" \
    && rm -rf /opt/osprey/broker-wheels
COPY host/osprey/ /opt/osprey/broker/osprey/
# compose.yaml's default job replays the demo session: in the image, so that an engine on
# another machine needs nothing from this one's disk but the workspace.
COPY examples/ /osprey/examples/
RUN python3 -m compileall -q /opt/osprey/broker
ENV PYTHONPATH=/opt/osprey/broker:/opt/osprey/lib
ENTRYPOINT ["/usr/bin/tini", "--", "python3", "-m", "osprey"]
