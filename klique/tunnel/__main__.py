import sys

from klique.tunnel.gateway import main

sys.exit(main())
