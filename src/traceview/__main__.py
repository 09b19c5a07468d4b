from traceview.launch import main

main()
