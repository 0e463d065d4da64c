"""Who this process is to HDFS: the one place HDFS credentials enter.

Every reader and writer of ``hdfs://`` -- the loader and its shard cache, the commands, the Spark
job's driver and Python workers, the DataFrame source, the Beam pipeline's workers -- goes through
:mod:`tfrecord_io.storage.fs`, which opens its hdfs-native client with :func:`current`'s
credentials, the first of these that is set:

===========================  ==================================================================
a keytab                     ``TFRECORD_IO_KERBEROS_PRINCIPAL`` and ``TFRECORD_IO_KERBEROS_KEYTAB``
                             (every command's ``--principal``/``--keytab`` set them; the Spark job
                             also takes spark-submit's ``--principal``/``--keytab``): hdfs-native
                             logs in from the keytab itself -- no ``kinit`` -- and keeps the
                             ticket in memory
a ticket cache               ``KRB5CCNAME`` (else the default cache) as ``kinit`` leaves it
delegation tokens            ``HADOOP_TOKEN_FILE_LOCATION``: what YARN writes into every container,
                             so that executors need no Kerberos credentials of their own
simple authentication        ``HADOOP_USER_NAME``, else the OS user
===========================  ==================================================================

Which one the cluster wants is the cluster's business: ``HADOOP_CONF_DIR`` says
(``hadoop.security.authentication``, ``dfs.data.transfer.protection``), and ``KRB5_CONFIG`` names
the realm's KDC (and, through :func:`java_options`, to the JVMs this process starts: Java reads
``-Djava.security.krb5.conf`` instead).  A keytab's *path* reaches the processes this one starts on the same machine
(local Spark workers, Beam's in-process and LOOPBACK workers) through the environment, never
another machine: executors on a cluster use the delegation tokens YARN gives them.

Nothing here prints or logs a credential: errors name the variable, the principal and the cache's
name, never a ticket, a token or what a keytab holds.
"""

from __future__ import annotations

import errno
import getpass
import os
import re
from dataclasses import dataclass

__all__ = ["KEYTAB_ENV", "PRINCIPAL_ENV", "HdfsCredentials", "current", "explain", "java_options", "use_keytab"]

PRINCIPAL_ENV = "TFRECORD_IO_KERBEROS_PRINCIPAL"
KEYTAB_ENV = "TFRECORD_IO_KERBEROS_KEYTAB"
_FIX_TICKET = (f"run kinit (or point KRB5CCNAME at a ticket cache), or give a keytab: --principal and --keytab "
               f"({PRINCIPAL_ENV} and {KEYTAB_ENV})")


@dataclass(frozen=True)
class HdfsCredentials:
    """The credentials a new HDFS client of this process uses (module doc); compare to reuse one."""

    principal: str | None = None
    keytab: str | None = None
    ticket_cache: str | None = None
    token_file: str | None = None
    user: str = ""
    conf_dir: str | None = None

    def client_kwargs(self) -> dict:
        """hdfs-native's ``Client`` keyword arguments for them."""
        if self.keytab:
            return {"kerberos_principal": self.principal, "kerberos_keytab": self.keytab}
        return {}

    def describe(self) -> str:
        """What a client tried, for an error message (names only)."""
        if not _kerberos_conf(self.conf_dir):
            where = "HADOOP_CONF_DIR is not set" if not self.conf_dir else \
                f"the core-site.xml of HADOOP_CONF_DIR {self.conf_dir} does not say hadoop.security.authentication=kerberos"
            return f"simple authentication as {self.user}, since {where}"
        if self.keytab:
            return f"the principal {self.principal} with the keytab {self.keytab}"
        if self.token_file:
            return "the delegation tokens of HADOOP_TOKEN_FILE_LOCATION, else a Kerberos ticket"
        return "the Kerberos ticket cache of KRB5CCNAME" if self.ticket_cache else "the default Kerberos ticket cache"


def _kerberos_conf(conf_dir: str | None) -> bool:
    """Does ``conf_dir``'s core-site.xml ask for Kerberos (as hdfs-native reads it)?"""
    if not conf_dir:
        return False
    import xml.etree.ElementTree as ET

    try:
        root = ET.parse(os.path.join(conf_dir, "core-site.xml")).getroot()
    except (OSError, ET.ParseError):
        return False
    return any((p.findtext("name") or "").strip() == "hadoop.security.authentication"
               and (p.findtext("value") or "").strip().lower() == "kerberos" for p in root.iter("property"))


def current() -> HdfsCredentials:
    """This process's credentials now, from its environment (module doc)."""
    env = os.environ
    principal, keytab = env.get(PRINCIPAL_ENV) or None, env.get(KEYTAB_ENV) or None
    if bool(principal) != bool(keytab):
        missing = KEYTAB_ENV if principal else PRINCIPAL_ENV
        raise ValueError(f"{missing} is not set: a keytab needs its principal and the principal its keytab "
                         f"(--principal and --keytab go together)")
    return HdfsCredentials(principal=principal, keytab=keytab, ticket_cache=env.get("KRB5CCNAME") or None,
                           token_file=env.get("HADOOP_TOKEN_FILE_LOCATION") or None,
                           user=env.get("HADOOP_USER_NAME") or getpass.getuser(),
                           conf_dir=env.get("HADOOP_CONF_DIR") or None)


def java_options() -> str:
    """JVM options that make a JVM this process starts (Spark's) find the same realm: Java reads
    ``java.security.krb5.conf``, not ``KRB5_CONFIG``."""
    conf = os.environ.get("KRB5_CONFIG")
    return f"-Djava.security.krb5.conf={conf}" if conf else ""


def use_keytab(principal: str, keytab: str) -> None:
    """Log in to HDFS from ``keytab`` as ``principal`` in this process and the processes it starts
    (what ``--principal``/``--keytab`` do).  ValueError when the keytab cannot be read."""
    if not principal or not keytab:
        raise ValueError("--principal and --keytab go together: a keytab needs its principal and the principal "
                         "its keytab")
    path = os.path.abspath(os.path.expanduser(keytab))
    if not os.path.isfile(path) or not os.access(path, os.R_OK):
        raise ValueError(f"the keytab {keytab} of --keytab is not a readable file")
    os.environ[PRINCIPAL_ENV] = principal
    os.environ[KEYTAB_ENV] = path


def explain(error_text: str, uri: str, credentials: HdfsCredentials,
            listening: bool | None = None) -> PermissionError | None:
    """A PermissionError that says what is missing and what to do, for an hdfs-native error that
    means this client was not let in; None for any other error.  ``listening``: whether the
    NameNode still accepts connections (a closed connection from one that does refused us)."""
    def refused(what: str) -> PermissionError:
        return PermissionError(errno.EACCES, what, uri)

    if "GSSAPIError" in error_text or "GSS_S_" in error_text:
        if re.search(r"[Tt]icket expired", error_text):
            return refused("the Kerberos ticket (KRB5CCNAME, or the default cache) has expired: run kinit again, "
                           "or give a keytab: --principal and --keytab")
        if "Client not found in Kerberos database" in error_text or "not found in Kerberos database" in error_text:
            return refused(f"the KDC does not know {credentials.describe()}: check the principal's name and "
                           f"realm (KRB5_CONFIG)")
        if "Cannot find KDC" in error_text or "Cannot contact any KDC" in error_text:
            return refused("no KDC answers for the realm: check KRB5_CONFIG (its [realms] kdc entry)")
        if credentials.keytab and re.search(r"No credentials|No key table|[Kk]ey table entry not found",
                                            error_text):
            return refused(f"no Kerberos key for {credentials.principal} in the keytab {credentials.keytab}: check "
                           f"the principal (--principal) against the keytab's (klist -kt {credentials.keytab})")
        if re.search(r"No Kerberos credentials available|No credentials cache found|GSS_S_NO_CRED", error_text):
            return refused(f"no Kerberos ticket for {uri}: {_FIX_TICKET}")
        message = error_text.rsplit('", "', 1)[-1].split('")', 1)[0] if '", "' in error_text else error_text
        return refused(f"Kerberos refused {credentials.describe()}: {message[:200]}")
    if listening and ("RPC listener disconnected" in error_text or "early eof" in error_text):
        # hdfs-native drops the NameNode's AuthorizationException / SASL refusal and reports only the
        # closed connection: from a NameNode that still listens, a client it does not let in.
        return refused(f"the NameNode at {uri} closed the connection before answering: it does not let this "
                       f"client in (tried {credentials.describe()}; a kerberized cluster needs its "
                       f"HADOOP_CONF_DIR with hadoop.security.authentication=kerberos, and a principal its ACLs "
                       f"allow)")
    return None
