from rlx.cli import main

raise SystemExit(main())
