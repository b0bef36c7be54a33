# Thin aliases for bootstrap.py, which does the real work (and also runs where make is missing).
PYTHON ?= python3

.PHONY: lab test timings exercises doctor setup site slides
lab:        ; $(PYTHON) bootstrap.py lab
test:       ; $(PYTHON) bootstrap.py test
timings:    ; $(PYTHON) bootstrap.py timings
exercises:  ; $(PYTHON) bootstrap.py exercises
doctor:     ; $(PYTHON) bootstrap.py doctor
setup:      ; $(PYTHON) bootstrap.py setup
site:       ; $(PYTHON) bootstrap.py site
slides:     ; $(PYTHON) bootstrap.py slides
