"""The built-in checks' fixes, each defined once: the catalogue (catalogue.py), the cuDNN frontend and its CuTe DSL
stack (frontend.py), and the installer policy for an externally managed interpreter (installer.py). Like every
built-in module they import only dsv4_doctor.api."""
