module pando.invalid/pando-agent

go 1.22
