import sys

from echomq.cli import main

sys.exit(main())
