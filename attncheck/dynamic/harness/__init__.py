"""How untrusted code runs and how the parent talks to it: the sandbox, the seccomp filter,
the file channel, and the children started before their file asks."""
