"""The ToolService from the broker's side: how the broker calls it and where it runs.

- `client.py`: `ToolClient`, the typed calls, and `Connection`, one gRPC channel with its token;
- `targets.py`: where a service listens (`UnixTarget`, or `TlsTarget` for TCP with TLS);
- `wire.py`: the results, as pydantic views of the proto messages;
- `homes.py`: the homes a session's service runs in (local dispatcher, lane, attached lane),
  `build_home` and `make_home`;
- `home_config.py`: which home, as typed configuration built from the sandbox settings;
- `backend.py`: the `LaneBackend` interface that makes and removes lanes;
- `lanes.py`: `LocalDockerBackend`, lanes on this machine's Docker engine;
- `images.py`: lane images, built from a content hash and only when missing.

`lanes.py` and `images.py` (and the docker SDK) are imported only where a lane is made or reaped.
"""
