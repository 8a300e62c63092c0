import sys

from drainsafe.cli import main

sys.exit(main())
