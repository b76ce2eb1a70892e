"""What runs in the child: its main, the executor that builds and runs targets, and the
child-side hooks some probes need."""
