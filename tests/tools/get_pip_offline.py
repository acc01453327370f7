# SPDX-License-Identifier: GPL-3.0-or-later
"""Stand-in for get-pip.py, which ansible-test downloads from a host these machines cannot reach.

ansible-test creates its sanity/units venvs without pip, then runs a cached "get-pip" script with
pip's install arguments. This does the same job with what every CPython ships: ensurepip installs
the bundled pip, then that pip installs the exact versions ansible-test asked for from the package
index. The Makefile copies this file to ~/.ansible/test/cache/get_pip_<version>.py.
"""
import ensurepip
import os
import subprocess
import sys

# get-pip.py's own flags; pip itself does not know them.
OWN_FLAGS = {"--no-setuptools", "--no-wheel"}


def ca_bundle():
    """The CA bundle pip should trust: the caller's choice, else the system's.

    ansible-test runs this with a reduced environment, so PIP_CERT set by the machine may be gone;
    machines behind a TLS-inspecting proxy need the system bundle, not pip's vendored certifi.
    """
    for candidate in (os.environ.get("PIP_CERT"), os.environ.get("SSL_CERT_FILE"), "/etc/ssl/certs/ca-certificates.crt"):
        if candidate and os.path.isfile(candidate):
            return candidate
    return None


def main():
    args = [a for a in sys.argv[1:] if a not in OWN_FLAGS]
    if args and args[0] == "install":
        args = args[1:]
    ensurepip.bootstrap(upgrade=True)
    bundle = ca_bundle()
    if bundle and sys.prefix != sys.base_prefix:
        # A venv-local pip.conf keeps later pip runs in this venv (ansible-test's own requirement
        # installs) on the same bundle.
        with open(os.path.join(sys.prefix, "pip.conf"), "w") as conf:
            conf.write("[global]\ncert = %s\n" % bundle)
    env = dict(os.environ)
    if bundle:
        env["PIP_CERT"] = bundle
    # Packages ansible-test requests (e.g. pip==24.2); the bundled pip fetches them.
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--disable-pip-version-check", *args], env=env)


if __name__ == "__main__":
    main()
