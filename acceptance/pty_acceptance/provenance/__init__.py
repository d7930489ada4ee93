"""What the deployment is made of and where it came from: the double build
(BUILD), the content-bound source manifest (SCOPE-1), the checkout's
revision, the candidate runtime's identity (RUNTIME-1), what feeds the
supervisor besides its files (OWN-2), and the running supervisor tied to the
installed binary (SCOPE-2)."""
