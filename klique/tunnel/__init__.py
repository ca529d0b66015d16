"""Sessions through the control plane: the frames of a worker's outbound tunnel (protocol.py), the
gateway browsers and tunnels meet at (gateway.py) and the daemon's end of the tunnel (agent.py).
No Django: the gateway asks the control plane over HTTP."""
