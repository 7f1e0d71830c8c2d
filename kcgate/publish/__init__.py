"""Publishers: where a rendered report goes beyond files (today: a GitHub pull request).

``settings`` reads the environment once; ``github_pr`` talks to the REST API through PyGithub. The
CLI imports them inside the command, so ``kcgate --help`` never pays for PyGithub.
"""
