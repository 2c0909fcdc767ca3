"""The ToolService from the broker's side: the client, the wire views, the homes it runs in
(local dispatcher, lane, attached lane), lanes and their images."""
