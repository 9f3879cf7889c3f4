# The startup file of bash in a terminal of `make demo`'s JupyterLab (see
# jupyter_server_config.py beside it): a login shell's files, in bash's order, then
# $AIR_DEMO_BIN (where `air` is) first on PATH, which /etc/profile may have reset.
if [ -r /etc/profile ]; then
    . /etc/profile
fi
if [ -r ~/.bash_profile ]; then
    . ~/.bash_profile
elif [ -r ~/.bash_login ]; then
    . ~/.bash_login
elif [ -r ~/.profile ]; then
    . ~/.profile
fi
if [ -n "${AIR_DEMO_BIN-}" ]; then
    PATH="$AIR_DEMO_BIN:$PATH"
    export PATH
fi
unset AIR_DEMO_BIN
