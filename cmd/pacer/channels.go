package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/pacerhq/pacer/bucket"
	"github.com/pacerhq/pacer/channels"
	"github.com/pacerhq/pacer/channels/apns"
	"github.com/pacerhq/pacer/channels/fcm"
	"github.com/pacerhq/pacer/channels/sendgrid"
	"github.com/pacerhq/pacer/channels/whatsapp"
)

const channelList = "whatsapp, apns, fcm, sendgrid"

// checkChannel returns a usage error unless name is a channel Pacer serves.
func checkChannel(name string) error {
	switch name {
	case "whatsapp", "apns", "fcm", "sendgrid":
		return nil
	case "":
		return &usageError{"--channel is required (" + channelList + ")"}
	}
	return &usageError{fmt.Sprintf("unknown channel %q (%s)", name, channelList)}
}

// buildSender returns the adapter and the per-key limit of channel, built
// from cfg. Errors name the variable at fault and never echo a secret.
func buildSender(ctx context.Context, channel string, cfg config) (channels.Sender, bucket.Limit, error) {
	switch channel {
	case "apns":
		c := cfg.APNs
		for _, v := range []struct{ name, val string }{
			{"PACER_APNS_KEY_ID", c.KeyID}, {"PACER_APNS_TEAM_ID", c.TeamID}, {"PACER_APNS_KEY_FILE", c.KeyFile},
		} {
			if v.val == "" {
				return nil, bucket.Limit{}, &configError{v.name, "required for --channel apns"}
			}
		}
		p8, err := os.ReadFile(c.KeyFile)
		if err != nil {
			return nil, bucket.Limit{}, &configError{"PACER_APNS_KEY_FILE", "cannot read the .p8 key file: " + pathError(err)}
		}
		s, err := apns.New(apns.Config{BaseURL: c.BaseURL, KeyID: c.KeyID, TeamID: c.TeamID, PrivateKey: p8})
		if err != nil {
			return nil, bucket.Limit{}, adapterConfigError(err, map[string]string{
				"Config.KeyID": "PACER_APNS_KEY_ID", "Config.TeamID": "PACER_APNS_TEAM_ID",
				"Config.PrivateKey": "PACER_APNS_KEY_FILE", "Config.BaseURL": "PACER_APNS_BASE_URL",
			})
		}
		return s, channelLimit(channel, cfg), nil
	case "fcm":
		c := cfg.FCM
		if c.CredentialsFile == "" {
			return nil, bucket.Limit{}, &configError{"PACER_FCM_CREDENTIALS_FILE", "required for --channel fcm"}
		}
		js, err := os.ReadFile(c.CredentialsFile)
		if err != nil {
			return nil, bucket.Limit{}, &configError{"PACER_FCM_CREDENTIALS_FILE", "cannot read the service-account file: " + pathError(err)}
		}
		s, err := fcm.New(ctx, fcm.Config{BaseURL: c.BaseURL, CredentialsJSON: js})
		if err != nil {
			return nil, bucket.Limit{}, adapterConfigError(err, map[string]string{
				"Config.CredentialsJSON": "PACER_FCM_CREDENTIALS_FILE", "Config.BaseURL": "PACER_FCM_BASE_URL",
			})
		}
		return s, channelLimit(channel, cfg), nil
	case "whatsapp":
		c := cfg.WhatsApp
		if c.Token == "" {
			return nil, bucket.Limit{}, &configError{"PACER_WHATSAPP_TOKEN", "required for --channel whatsapp"}
		}
		s, err := whatsapp.New(whatsapp.Config{BaseURL: c.BaseURL, APIVersion: c.APIVersion, Token: c.Token})
		if err != nil {
			return nil, bucket.Limit{}, fmt.Errorf("%w: %w", errConfig, err)
		}
		return s, channelLimit(channel, cfg), nil
	case "sendgrid":
		c := cfg.SendGrid
		keys, err := parseKeyList(c.APIKeys)
		if err != nil {
			return nil, bucket.Limit{}, &configError{"PACER_SENDGRID_API_KEYS", err.Error()}
		}
		obo, err := parseKeyList(c.OnBehalfOf)
		if err != nil {
			return nil, bucket.Limit{}, &configError{"PACER_SENDGRID_ON_BEHALF_OF", err.Error()}
		}
		if len(keys) == 0 {
			return nil, bucket.Limit{}, &configError{"PACER_SENDGRID_API_KEYS", "required for --channel sendgrid (name=key,...)"}
		}
		s, err := sendgrid.New(sendgrid.Config{BaseURL: c.BaseURL, APIKeys: keys, OnBehalfOf: obo})
		if err != nil {
			return nil, bucket.Limit{}, &configError{"PACER_SENDGRID_API_KEYS or PACER_SENDGRID_ON_BEHALF_OF", err.Error()}
		}
		return s, channelLimit(channel, cfg), nil
	}
	return nil, bucket.Limit{}, checkChannel(channel)
}

// adapterConfigError turns an adapter's New error, which names its Config
// field, into one that names the variable that set it.
func adapterConfigError(err error, vars map[string]string) error {
	msg := err.Error()
	for field, v := range vars {
		if strings.Contains(msg, field) {
			return &configError{v, strings.ReplaceAll(msg, field, v)}
		}
	}
	return fmt.Errorf("%w: %w", errConfig, err)
}

// pathError names the failure of a file read without repeating the path.
func pathError(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// parseKeyList parses "name=value,name2=value2". Errors name the entry by
// position, never by value (values are secrets).
func parseKeyList(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for i, part := range strings.Split(s, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok || name == "" || val == "" {
			return nil, fmt.Errorf("entry %d is not name=value", i+1)
		}
		if _, dup := out[name]; dup {
			return nil, fmt.Errorf("name %q appears twice", name)
		}
		out[name] = val
	}
	return out, nil
}
