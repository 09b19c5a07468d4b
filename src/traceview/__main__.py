from traceview.cli import main

main()
