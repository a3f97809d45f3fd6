"""What watches the running worker from inside: its log (:mod:`.logs`), the garbage collector
(:mod:`.gcwatch`), the Trio thread's lateness (:mod:`.loopwatch`), and its code and data dir
changing on disk (:mod:`.codewatch`)."""
