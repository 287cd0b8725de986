import sys

from tests.support.lossy_fs.daemon import main

sys.exit(main())
