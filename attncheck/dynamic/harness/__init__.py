"""How untrusted code runs and how the parent talks to it: the sandbox, the seccomp filter,
the file channel, the children started before their file asks, and the jailed children a warm
zygote forks for ``attncheck grade`` (``forked``, ``zygote``)."""
